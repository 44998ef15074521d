from services.embedder.app import app
from shared.service import run_app

run_app("embedder", app)
