"""The SQL store's Alembic migration scripts: env.py (runs the revisions on the connection the store
hands over, SQLite in batch mode), script.py.mako (the template of a new revision) and versions/ (one
module per revision). They are driven from code (mlscope/store/sql/schema.py builds the Alembic
Config); no alembic.ini is needed.

Revisions form one chain, and every revision id starts with "mlscope_" followed by its number
(mlscope_0001, mlscope_0002, ...): an id with that prefix that this code does not know was written by a
newer mlscope, any other by another application. A new revision (say, indexes):

    from alembic import command
    from mlscope.store.sql.schema import alembic_config
    command.revision(alembic_config(), message="measurement indexes", rev_id="mlscope_0003")

then fill in its upgrade() and downgrade(), and change tables.py to match: a fresh database is created
from tables.py and stamped at the head revision, and tests/contract/test_migrations.py checks that an
upgraded database and a fresh one have the same schema.
"""
