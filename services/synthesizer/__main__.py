from services.synthesizer.app import app
from shared.service import run_app

run_app("synthesizer", app)
