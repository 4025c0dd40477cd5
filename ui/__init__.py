"""The app's Gradio side beside app.py's layout: handlers, the guided tour, the start-up warm-up."""
