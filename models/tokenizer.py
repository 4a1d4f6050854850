"""Front door: `models.tokenizer` is models.gpt.tokenizer (see models/doors.py)."""
from models.doors import front_door
front_door(__name__, "models.gpt.tokenizer")
