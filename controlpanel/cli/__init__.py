"""`ajuste`: a thin command-line client of the REST API (httpx + click, no Django import).

main.py holds the root group and registers one group per module (buckets.py: `ajuste bucket`);
client.py the HTTP client and its errors; output.py `-o json|table`; transfers.py presigned
uploads and downloads.
"""
