"""Front door: `models.bigram` is models.lessons.bigram (see models/doors.py)."""
from models.doors import front_door
front_door(__name__, "models.lessons.bigram")
