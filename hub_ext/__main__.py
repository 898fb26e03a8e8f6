from hub_ext.cli import main

main()
