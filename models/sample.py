"""Front door: `models.sample` is models.training.sample (see models/doors.py)."""
from models.doors import front_door
front_door(__name__, "models.training.sample")
