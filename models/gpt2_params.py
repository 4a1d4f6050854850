"""Front door: `models.gpt2_params` is models.gpt.gpt2_params (see models/doors.py)."""
from models.doors import front_door
front_door(__name__, "models.gpt.gpt2_params")
