"""Front door: `models.eval` is models.training.eval (see models/doors.py)."""
from models.doors import front_door
front_door(__name__, "models.training.eval")
