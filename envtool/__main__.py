from envtool.cli import main

main()
