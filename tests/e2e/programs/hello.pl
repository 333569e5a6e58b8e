my $l = <STDIN>; chomp $l; print "hello $l\n";
