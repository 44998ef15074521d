from services.retriever.app import app
from shared.service import run_app

run_app("retriever", app)
