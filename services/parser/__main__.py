from services.parser.app import app
from shared.service import run_app

run_app("parser", app)
