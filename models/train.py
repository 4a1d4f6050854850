"""Front door: `models.train` is models.training.train (see models/doors.py)."""
from models.doors import front_door
front_door(__name__, "models.training.train")
