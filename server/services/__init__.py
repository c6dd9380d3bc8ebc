"""Services: what the server does, called by the API, the pages, the monitor and the admin command.

No FastAPI here: a service raises the exceptions of server/errors.py, which server/api/errors.py turns into
HTTP answers.
"""
