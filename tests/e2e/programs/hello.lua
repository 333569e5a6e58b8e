local l = io.read("l"); print("hello " .. l)
