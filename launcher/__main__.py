"""`python -m launcher` is the `tflaunch` command."""

from launcher.cli.main import main

if __name__ == "__main__":
    main()
