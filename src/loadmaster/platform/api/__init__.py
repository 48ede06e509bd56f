"""The platform's HTTP API (FastAPI). `create_app(ApiContext(...))` builds it; server.py serves it."""
