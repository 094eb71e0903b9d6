from lra.cli import main

raise SystemExit(main())
