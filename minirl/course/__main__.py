"""python -m minirl.course: the course's commands (see `minirl.course.commands`)."""
from .commands import main

main()
