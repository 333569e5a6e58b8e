read l
echo "hello $l"
