"""Capabilities: package manifests, the MCP host, the sandbox and contract tests."""
