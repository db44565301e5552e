"""The PostgreSQL backend (psycopg 3): its statements, its search (``tsvector``) and its checks."""
