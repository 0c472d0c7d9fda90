"""A stand-in for an existing third-party MCP server: plain text results, no receipts."""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer

mcp = MCPServer("weather")


@mcp.tool()
def forecast(city: str) -> str:
    """Tomorrow's forecast for a city."""
    return f"{city}: sunny, 24 °C"


if __name__ == "__main__":
    mcp.run("stdio")
