print("hello " + input())
