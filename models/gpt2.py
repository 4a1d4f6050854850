"""Front door: `models.gpt2` is models.gpt.gpt2 (see models/doors.py)."""
from models.doors import front_door
front_door(__name__, "models.gpt.gpt2")
