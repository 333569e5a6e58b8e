use std::io::BufRead;
fn main(){ let l = std::io::stdin().lock().lines().next().unwrap().unwrap(); println!("hello {}", l); }
