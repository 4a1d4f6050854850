"""Front door: `models.export_merged` is models.training.export_merged (see models/doors.py)."""
from models.doors import front_door
front_door(__name__, "models.training.export_merged")
