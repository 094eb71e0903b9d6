from lra.cli.main import main

raise SystemExit(main())
