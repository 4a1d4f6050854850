"""Front door: `models.prepare` is models.training.prepare (see models/doors.py)."""
from models.doors import front_door
front_door(__name__, "models.training.prepare")
