"""Sans-IO core: pure logic shared by every process. Imports no trio, grpc, asyncio or pyfuse3
(tests/unit/test_core_purity.py enforces it)."""
