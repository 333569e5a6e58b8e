#include <iostream>
#include <string>
int main(){ std::string s; std::getline(std::cin, s); std::cout << "hello " << s << std::endl; }
