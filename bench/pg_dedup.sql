-- pg_dedup.sql — the dedup indexer of apps/dedup/ done the way a user who picks
-- a DBMS would: PostgreSQL, PL/pgSQL, one transaction per document
-- (update_document), run by bench/pg_dedup.sh. The same results as the
-- dedup plugin, so that bench/dedup.sh can compare them row for row:
--   - a cluster is the documents of one SHA-256 of the contents; its
--     canonical is the bytewise smallest URL (the database is created with
--     the C collation);
--   - postings (term, url) of the canonical document of every cluster;
--   - terms: ASCII letters folded to lower case, maximal runs of [a-z0-9],
--     a run cut to its first 64 bytes (apps/dedup/dedup_text.h); the
--     database's encoding is SQL_ASCII, so other bytes are left alone and
--     separate terms, as there.
-- Concurrency: the cluster's row in dups is locked (FOR UPDATE) before its
-- canonical is read, so two documents joining one cluster at once settle
-- the canonical and its postings one after the other.
CREATE TABLE documents (url text PRIMARY KEY, contents bytea NOT NULL, hash bytea NOT NULL);
CREATE TABLE members (hash bytea, url text, PRIMARY KEY (hash, url));
CREATE TABLE dups (hash bytea PRIMARY KEY, canonical text NOT NULL);
CREATE TABLE postings (term text, url text, PRIMARY KEY (term, url));
CREATE TABLE staging (id bigserial PRIMARY KEY, url text, contents bytea);
CREATE SEQUENCE q;

CREATE FUNCTION terms(c bytea) RETURNS SETOF text LANGUAGE sql IMMUTABLE AS $$
  SELECT DISTINCT left(t, 64)
  FROM regexp_split_to_table(lower(convert_from(c, 'SQL_ASCII')), '[^a-z0-9]+') t
  WHERE t <> '' $$;

CREATE FUNCTION add_postings(u text, c bytea) RETURNS void LANGUAGE sql AS $$
  INSERT INTO postings SELECT t, u FROM terms(c) t ON CONFLICT DO NOTHING $$;
CREATE FUNCTION del_postings(u text, c bytea) RETURNS void LANGUAGE sql AS $$
  DELETE FROM postings WHERE url = u AND term IN (SELECT terms(c)) $$;

CREATE FUNCTION update_document(u text, c bytea) RETURNS void LANGUAGE plpgsql AS $$
DECLARE h bytea := sha256(c); old bytea; oldc bytea; cur text; nc text; ncc bytea;
BEGIN
  SELECT hash, contents INTO old, oldc FROM documents WHERE url = u FOR UPDATE;
  IF old = h THEN RETURN; END IF;
  INSERT INTO documents VALUES (u, c, h) ON CONFLICT (url) DO UPDATE SET contents = c, hash = h;
  IF old IS NOT NULL THEN                      -- leave the old cluster
    DELETE FROM members WHERE hash = old AND url = u;
    SELECT canonical INTO cur FROM dups WHERE hash = old FOR UPDATE;
    IF cur = u THEN
      PERFORM del_postings(u, oldc);
      SELECT min(url) INTO nc FROM members WHERE hash = old;
      IF nc IS NULL THEN DELETE FROM dups WHERE hash = old;
      ELSE UPDATE dups SET canonical = nc WHERE hash = old;
           SELECT contents INTO ncc FROM documents WHERE url = nc; PERFORM add_postings(nc, ncc); END IF;
    END IF;
  END IF;
  INSERT INTO members VALUES (h, u) ON CONFLICT DO NOTHING;
  -- the cluster's row, made by whoever comes first, then locked
  INSERT INTO dups VALUES (h, u) ON CONFLICT (hash) DO NOTHING;
  SELECT canonical INTO cur FROM dups WHERE hash = h FOR UPDATE;
  IF cur = u THEN
    PERFORM add_postings(u, c);
  ELSIF u < cur THEN
    UPDATE dups SET canonical = u WHERE hash = h;
    PERFORM del_postings(cur, c); PERFORM add_postings(u, c);
  END IF;
END $$;
