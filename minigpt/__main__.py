from minigpt.cli import main

raise SystemExit(main())
