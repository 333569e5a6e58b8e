l = gets.chomp; puts "hello #{l}"
