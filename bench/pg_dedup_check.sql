-- pg_dedup_check.sql — PostgreSQL's `percolator check`: one query that
-- recomputes, from the documents table alone, what update_document
-- (pg_dedup.sql) maintains — each document's hash, the members of each
-- hash, each cluster's canonical (the smallest URL) and the postings of the
-- canonicals — and counts the rows that differ from what the tables hold.
-- bench/pg_dedup.sh times it after each run; 0 is the answer of a run
-- that kept its tables right.
WITH d AS (SELECT url, contents, sha256(contents) AS h FROM documents),
     c AS (SELECT h, min(url) AS canonical FROM d GROUP BY h),
     p AS (SELECT DISTINCT t.t AS term, c.canonical AS url
           FROM c JOIN d ON d.url = c.canonical, LATERAL terms(d.contents) AS t(t))
SELECT (SELECT count(*) FROM d JOIN documents x USING (url) WHERE x.hash <> d.h)
     + (SELECT count(*) FROM ((SELECT h, url FROM d EXCEPT SELECT hash, url FROM members)
                              UNION ALL
                              (SELECT hash, url FROM members EXCEPT SELECT h, url FROM d)) AS m)
     + (SELECT count(*) FROM ((SELECT h, canonical FROM c EXCEPT SELECT hash, canonical FROM dups)
                              UNION ALL
                              (SELECT hash, canonical FROM dups EXCEPT SELECT h, canonical FROM c)) AS k)
     + (SELECT count(*) FROM ((SELECT term, url FROM p EXCEPT SELECT term, url FROM postings)
                              UNION ALL
                              (SELECT term, url FROM postings EXCEPT SELECT term, url FROM p)) AS q)
       AS differences;
