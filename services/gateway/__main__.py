import uvicorn

from services.gateway.app import create_app
from shared.logs import configure_logging
from shared.settings import get_settings

settings = get_settings()
configure_logging("gateway", settings.service.log_level, settings.service.log_format)
uvicorn.run(
    create_app(settings),
    host=settings.service.gateway_host,
    port=settings.service.gateway_port,
    log_config=None,
    access_log=False,
)
