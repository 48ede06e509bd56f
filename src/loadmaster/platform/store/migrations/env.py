"""Alembic environment: the engine comes from Store (db.migrate), never from an ini file."""

from __future__ import annotations

from alembic import context

from loadmaster.platform.store.models import Base

config = context.config
engine = config.attributes["engine"]

with engine.begin() as connection:
    context.configure(connection=connection, target_metadata=Base.metadata,
                      render_as_batch=connection.dialect.name == "sqlite")
    context.run_migrations()
