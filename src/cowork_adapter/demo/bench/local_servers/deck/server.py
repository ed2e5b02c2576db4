"""Demo MCP server `deck`: build a slide deck over several calls, then save it as JSON.

Runs over stdio on the mcp SDK (1.x). Decks live only in this process's memory, and every call
records the serving process id in the deck: a deck saved intact proves that one server process
served the whole conversation (a client that starts a fresh process per call loses the deck).
DECK_OUTPUT_DIR is where decks are saved (the agent workspace); DECK_TASK_DIR names the task.
"""

import json
import os
from pathlib import Path

from mcp.server.fastmcp import FastMCP

OUTPUT_DIR = Path(os.environ.get("DECK_OUTPUT_DIR") or os.getcwd()).resolve()
TASK_NAME = os.path.basename(os.environ.get("DECK_TASK_DIR", "").rstrip("/"))
mcp = FastMCP("deck", log_level="WARNING")
DECKS = {}


def _deck(deck_id: str) -> dict:
    if deck_id not in DECKS:
        raise ValueError("no deck %r in this server process (create_deck first)" % deck_id)
    return DECKS[deck_id]


@mcp.tool()
def create_deck(deck_id: str, title: str) -> dict:
    """Start a new empty deck under deck_id."""
    DECKS[deck_id] = {"deck_id": deck_id, "task": TASK_NAME, "title": title, "slides": [], "served_by": [os.getpid()]}
    return {"deck_id": deck_id, "slides": 0}


@mcp.tool()
def add_slide(deck_id: str, heading: str, body: str = "") -> dict:
    """Append a slide to a deck created earlier in this session."""
    deck = _deck(deck_id)
    deck["slides"].append({"heading": heading, "body": body})
    deck["served_by"].append(os.getpid())
    return {"deck_id": deck_id, "slides": len(deck["slides"])}


@mcp.tool()
def save_deck(deck_id: str, filename: str) -> str:
    """Write the deck as JSON to filename inside the output directory."""
    deck = _deck(deck_id)
    deck["served_by"].append(os.getpid())
    target = (OUTPUT_DIR / filename).resolve()
    if OUTPUT_DIR not in target.parents:
        raise ValueError("filename must stay inside the output directory")
    target.write_text(json.dumps(deck, indent=2), encoding="utf-8")
    return "saved %d slides to %s" % (len(deck["slides"]), target.name)


if __name__ == "__main__":
    mcp.run(transport="stdio")
