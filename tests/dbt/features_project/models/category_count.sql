{{ config(materialized='stream_table', refresh_mode='differential') }}
-- A stream table over a documented one: its view reads through the column-comment companion.
select count(*) as categories, sum(n) as items from {{ ref('category_totals') }}
