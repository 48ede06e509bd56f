"""The platform's store: SQLAlchemy models, Alembic migrations, and the few writes that must be atomic."""
