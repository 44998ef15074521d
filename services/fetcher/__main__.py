from services.fetcher.app import app
from shared.service import run_app

run_app("fetcher", app)
