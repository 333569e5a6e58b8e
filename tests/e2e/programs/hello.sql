create table t(x text);
insert into t values ('hello');
select x || ' moat' from t;
