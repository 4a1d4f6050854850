"""Front door: `models.newton` is models.lessons.newton (see models/doors.py)."""
from models.doors import front_door
front_door(__name__, "models.lessons.newton")
