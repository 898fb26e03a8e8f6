from hub_ext.service.app import main

main()
