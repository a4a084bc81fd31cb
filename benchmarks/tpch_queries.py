"""TPC-H queries in Spark SQL over `tpch.<table>` (the benchmark's stream tables).

Only the queries the current release maintains differentially are listed with `differential`;
Q3 is used without its ORDER BY ... LIMIT 10 (Top-K is not differential yet), and says so.
"""

QUERIES = {
    "q1": """
select l_returnflag, l_linestatus,
       sum(l_quantity) as sum_qty, sum(l_extendedprice) as sum_base_price,
       sum(l_extendedprice * (1 - l_discount)) as sum_disc_price,
       sum(l_extendedprice * (1 - l_discount) * (1 + l_tax)) as sum_charge,
       avg(l_quantity) as avg_qty, avg(l_extendedprice) as avg_price, avg(l_discount) as avg_disc,
       count(*) as count_order
from tpch.lineitem
where l_shipdate <= date_sub(date '1998-12-01', 90)
group by l_returnflag, l_linestatus
""",
    "q3_nolimit": """
select l_orderkey, sum(l_extendedprice * (1 - l_discount)) as revenue, o_orderdate, o_shippriority
from tpch.customer, tpch.orders, tpch.lineitem
where c_mktsegment = 'BUILDING' and c_custkey = o_custkey and l_orderkey = o_orderkey
  and o_orderdate < date '1995-03-15' and l_shipdate > date '1995-03-15'
group by l_orderkey, o_orderdate, o_shippriority
""",
    "q5": """
select n_name, sum(l_extendedprice * (1 - l_discount)) as revenue
from tpch.customer, tpch.orders, tpch.lineitem, tpch.supplier, tpch.nation, tpch.region
where c_custkey = o_custkey and l_orderkey = o_orderkey and l_suppkey = s_suppkey
  and c_nationkey = s_nationkey and s_nationkey = n_nationkey and n_regionkey = r_regionkey
  and r_name = 'ASIA' and o_orderdate >= date '1994-01-01' and o_orderdate < date '1995-01-01'
group by n_name
""",
    "q6": """
select sum(l_extendedprice * l_discount) as revenue
from tpch.lineitem
where l_shipdate >= date '1994-01-01' and l_shipdate < date '1995-01-01'
  and l_discount between 0.05 and 0.07 and l_quantity < 24
""",
    "q12": """
select l_shipmode,
       sum(case when o_orderpriority = '1-URGENT' or o_orderpriority = '2-HIGH' then 1 else 0 end) as high_line_count,
       sum(case when o_orderpriority <> '1-URGENT' and o_orderpriority <> '2-HIGH' then 1 else 0 end) as low_line_count
from tpch.orders, tpch.lineitem
where o_orderkey = l_orderkey and l_shipmode in ('MAIL', 'SHIP') and l_commitdate < l_receiptdate
  and l_shipdate < l_commitdate and l_receiptdate >= date '1994-01-01' and l_receiptdate < date '1995-01-01'
group by l_shipmode
""",
}
