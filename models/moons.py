"""Front door: `models.moons` is models.lessons.moons (see models/doors.py)."""
from models.doors import front_door
front_door(__name__, "models.lessons.moons")
