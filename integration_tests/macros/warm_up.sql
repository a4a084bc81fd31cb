{# The JVM warm-up `make demo` runs before each `dbt run`'s models (on-run-start, with
   --vars '{warm_up_jvm: true}'; empty otherwise, which dbt reports as an OK hook without
   running anything). A fresh JVM's
   first heavy queries pay seconds of class loading and compilation, which would land on
   whichever model first has work, a different one in each run, and distort that model's
   refresh-against-build ratio. A scan, a join, an aggregate and a small write over the sources'
   Parquet files (read without Delta's log: which rows does not matter here), into a scratch
   directory of the work dir. Only the first 1,000,000 orders and 100,000 customers by id (a
   tenth at the demo's size; the files are written in id order, so the rest is skipped by its
   statistics): the JVM warms up on the kinds of work, not on their size (the whole sources
   took it 17-26 s at 10 M orders). #}
{% macro warm_up_jvm() %}
{% if var('warm_up_jvm', false) | as_bool %}
{% set work = env_var('DBT_SPARK_STREAM_WORK_DIR', '/tmp/dbt-spark-stream') %}
insert overwrite directory '{{ work }}/warm_up' using parquet
select c.region, o.status, count(*) as orders, sum(o.amount) as amount
from parquet.`{{ work }}/warehouse/shop.db/orders` o
join parquet.`{{ work }}/warehouse/shop.db/customers` c on o.customer_id = c.customer_id
where o.order_id <= 1000000 and c.customer_id <= 100000
group by c.region, o.status
{% endif %}
{% endmacro %}
