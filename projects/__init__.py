"""The governed content: PLCopen XML project files, element ids, reads, operations and the draft."""
