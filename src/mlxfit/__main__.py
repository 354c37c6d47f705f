from mlxfit.cli.app import main

main()
