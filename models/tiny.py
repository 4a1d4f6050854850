"""Front door: `models.tiny` is models.lessons.tiny (see models/doors.py)."""
from models.doors import front_door
front_door(__name__, "models.lessons.tiny")
