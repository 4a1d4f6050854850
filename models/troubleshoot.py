"""Front door: `models.troubleshoot` is models.lessons.troubleshoot (see models/doors.py)."""
from models.doors import front_door
front_door(__name__, "models.lessons.troubleshoot")
