import java.util.Scanner;
public class Main { public static void main(String[] a) { System.out.println("hello " + new Scanner(System.in).nextLine()); } }
