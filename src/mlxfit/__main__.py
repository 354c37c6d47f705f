from mlxfit.cli import main

main()
