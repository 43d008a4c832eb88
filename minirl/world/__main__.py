"""python -m minirl.world: rewrite the tiny world's files (see `minirl.world.generate`)."""
from .generate import main

main()
