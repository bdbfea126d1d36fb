"""tabbyAPI-specific pure logic (no host access): the n-gram drafting patch and its config twin."""
