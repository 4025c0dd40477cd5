"""The app's Gradio side beside app.py: the page's sections, the handlers, the guided tour, the start-up warm-up."""
