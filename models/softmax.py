"""Front door: `models.softmax` is models.lessons.softmax (see models/doors.py)."""
from models.doors import front_door
front_door(__name__, "models.lessons.softmax")
