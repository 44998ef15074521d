"""``python -m shared.embedding NAME``: fetch a known model's folder (:func:`shared.embedding.fetch.main`)."""

from shared.embedding.fetch import main

raise SystemExit(main())
