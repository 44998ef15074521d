import sys

from shared.logs import configure_logging
from shared.settings import get_settings

settings = get_settings()
configure_logging("gateway", settings.service.log_level, settings.service.log_format)

from services.gateway.security import ExposureRefused, check_exposure  # noqa: E402

try:
    check_exposure(settings.service.gateway_host, settings.gateway)
except ExposureRefused as exc:
    print(f"evidentia gateway: {exc}", file=sys.stderr)
    sys.exit(78)  # EX_CONFIG

import uvicorn  # noqa: E402

from services.gateway.app import create_app  # noqa: E402

uvicorn.run(
    create_app(settings),
    host=settings.service.gateway_host,
    port=settings.service.gateway_port,
    log_config=None,
    access_log=False,
)
